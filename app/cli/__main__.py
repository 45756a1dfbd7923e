"""`python -m app.cli ...`: the same as the `hostnet-rdma` command."""

import sys

from app.cli import main

sys.exit(main())
