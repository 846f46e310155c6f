import sys

from mixin.render import main

sys.exit(main())
