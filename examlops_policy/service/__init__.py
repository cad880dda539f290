"""The placement service: ``exa hardware serve --listen`` (an HTTP API over the decision cycle,
``service.app`` and ``service.server``), its bearer tokens (``service.tokens``) and the command
line's client of it (``service.client``, which imports no decision code)."""
