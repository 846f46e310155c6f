"""specwatch: watch speculative decoding on LLM serving nodes and export it to Prometheus."""

__version__ = "0.1.0"
# Where the project lives: the default runbook links point into its repository at this version.
PROJECT_URL = "https://github.com/specwatch/specwatch"
