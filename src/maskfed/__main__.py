import sys

from maskfed.entry import main  # Ctrl-C while maskfed.cli imports: one line, exit 130

sys.exit(main())
