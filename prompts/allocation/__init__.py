"""Appointment allocation (paper section 3): the model, as a scheduling agent, gives one scarce
appointment to a cisgender or a transgender candidate who differ in nothing clinical.

Modules: `content` (data files), `roster` (fictitious patients), `pairing` (pairs and symptoms),
`settings` (config validation), `render` (prompt text), `experiment` (TrialSpec streams, the
lead's entry point), `parse` (reply parsers), `simulate` (the simulator's responder).
"""
