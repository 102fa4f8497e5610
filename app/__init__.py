"""The Laneway service that `make run` serves, built from the `laneway` library's public hooks.

Not part of the wheel: main.py is the ASGI app (Laneway's own app with the example
workflows), examples.py the example workflows of the contract, host.py a host application
that embeds Laneway the two documented ways.
"""
