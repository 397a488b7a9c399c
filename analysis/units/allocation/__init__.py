"""The appointment-allocation experiment's analysis: selection shares and pair-aware tests
(`shares`), condition effects (`effects`), people like these (`population_tables`,
`population_report`), the identity swap, the authors' view (`authors`), log-probability shares
(`logprobs`), organ pairs, the roster, its own reads of the store (`load`), its figures, its
findings sentences, its planted-value check (`planted`), and the unit's `ExperimentAnalysis`
(`unit.ANALYSIS`)."""
