import sys

from typestrict_pipeline.cli import main

sys.exit(main())
