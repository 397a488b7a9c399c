"""The word-association experiment's analysis: bias tables (`bias`), the template check
(`templates`), its figure, its findings sentences, its planted-value check (`planted`), and the
unit's `ExperimentAnalysis` (`unit.ANALYSIS`)."""
