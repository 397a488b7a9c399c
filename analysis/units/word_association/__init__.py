"""The word-association experiment's analysis: bias tables (`tables`), the template check
(`templates`), its figure, and the unit's `ExperimentAnalysis` (`unit.ANALYSIS`)."""
