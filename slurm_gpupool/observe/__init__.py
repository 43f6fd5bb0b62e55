"""Reading the pool, never changing it: status and Prometheus metrics."""
