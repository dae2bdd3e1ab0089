"""The harness that reproduces the papers' experiments: the shell recipes' Python side.

Installed as the package ``pagesum_recipes`` (``setup.py`` maps this folder to that name).
It drives the library (``pagesum_plugin``) and its commands from above and is never imported
by them.
"""
