import sys

from maskfed.cli import main

sys.exit(main())
