"""Each built-in experiment's part of the analysis, one package per unit: its tables, figures,
report section and planted-value check, named by the unit (prompts/<name>/unit.py) through its
`ExperimentAnalysis` in `<name>/unit.py`. What the driver and every unit share (loading,
statistics, the report's pieces) stays in `ibias.analysis` itself."""
