"""The push-consumer engine: client instance, rebalance, pull loop, process queues."""
