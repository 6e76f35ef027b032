import sys

from .cli import main

if __name__ == "__main__":  # not when a spawned child process re-imports it
    sys.exit(main())
