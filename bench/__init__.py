"""rmqk benchmarks: ``python -m bench <scenario>`` from the repository root.

Each scenario prints one result line and appends a JSON record (scenario,
parameters, figures, target checks, machine, date, git commit) to
``bench/results/results.jsonl``. By default it runs against an embedded broker
started in a child process; ``--namesrv HOST:PORT`` runs the same scenario
against any cluster. docs/performance.md has the figures and the commands.
"""

SCENARIOS = (
    "ceiling",
    "consume",
    "latency",
    "memory",
    "rebalance",
    "spark-sink",
    "spark-source",
    "broker",
    "processes",
)
