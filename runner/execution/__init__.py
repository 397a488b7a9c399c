"""A run from its config to its result: the plan (`plan`, `planning`, `planning_report`), the
selection of models and experiments, the run itself (`run`, `run_context`, `run_schedule`,
`run_result`), its rehearsal on the simulator, `ibias models`' check and the event loop the
run starts.

It may import the config, the providers, the simulator, the scheduling package, the batch run,
the experiments and the store, and the small shared modules at `runner/`'s top level (console,
progress, status, money, redact, keyed_ids); never the CLI (`cli`, `startup`, `commands/`),
which imports it.
"""
