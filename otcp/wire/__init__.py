"""The controller <-> agent contract, shared by both peers (docs/design.md, "Wire protocol").

- `limits`: protocol version, frame sizes and parameter ranges;
- `framing`: length-prefixed frames and JSON bodies;
- `session`: HMAC challenge-response and per-frame MACs;
- `messages`: the message schemas and their constructors;
- `paramset`: the parameter set, its rules and the one generation rule.

Nothing here touches a socket or the kernel, so every rule is tested without either.
"""
