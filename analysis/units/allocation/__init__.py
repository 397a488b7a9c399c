"""The appointment-allocation experiment's analysis: selection shares and pair-aware tests
(`tables`), condition effects (`effects`), people like these (`population_tables`,
`population_report`), the identity swap, the authors' view, log-probability shares, organ
pairs, the roster, its figures, and the unit's `ExperimentAnalysis` (`unit.ANALYSIS`)."""
