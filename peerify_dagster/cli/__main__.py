import sys

from peerify_dagster.cli import main

sys.exit(main())
