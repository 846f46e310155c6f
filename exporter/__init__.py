"""specwatch: watch speculative decoding on LLM serving nodes and export it to Prometheus."""

__version__ = "0.1.0"
