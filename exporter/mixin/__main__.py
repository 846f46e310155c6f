import sys

from exporter.mixin.repository import main

sys.exit(main())
