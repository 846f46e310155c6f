"""What the outside world reads: the Collector, the HTTP server and its TLS and auth."""
