"""`python -m tf_embedding` runs the `tf-embedding` command."""

import sys

from tf_embedding.job.cli import main

sys.exit(main())
