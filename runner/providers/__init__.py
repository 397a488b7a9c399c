"""Providers: one registered class per API (see base.py for the contract, registry.py for the
lookup). Importing the package imports no provider: registry.py loads a provider's module the
first time its name is looked up, so `ibias --help`, `status`, `plan` and `sql` never pay for
aiohttp (or the simulator's aiohttp.web) they do not use."""
