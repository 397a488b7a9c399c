"""The built-in cross-experiment analyses: each reads more than one experiment's tables (or
the population method's account of them), so it lives beside the units rather than in the
general modules, which import no unit. Each is registered in analysis/cross.py by its
"module:attribute" path, as an `ibias.cross_analyses` entry point would be.
"""
