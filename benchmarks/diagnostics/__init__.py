"""One-off diagnostics: measurements that answered a question once (why a step costs what it
costs, which ablation helps, how a policy behaves). Their findings and commands live in
benchmarks/RESULTS.md; run one as `python -m benchmarks.diagnostics.<name> --help`. The
maintained benchmarks behind the docs' current numbers and generated tables sit one level up."""
