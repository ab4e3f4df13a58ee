"""ROS-free helpers shared by the layers above: episode schedules, package paths, progress bars,
child processes, the exit after a caught Ctrl-C, and the pictures drawn for videos and windows."""
