"""LeRobotDataset v3.0 directories: export from bags (export.py, `arm-act export --format
lerobot`) and import for training (load.py, `arm-act train --data DIR`); the layout and the
video codec in layout.py. docs/using.md, "LeRobot datasets", describes both for users."""
