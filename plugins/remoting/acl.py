"""ACL signing of requests (in progress)."""
