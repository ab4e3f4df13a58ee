import sys

from arm_act.cli.main import main

sys.exit(main())
