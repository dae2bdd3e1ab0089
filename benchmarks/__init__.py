"""Speed and memory benchmarks; run them from the repository root with ``python -m benchmarks.<name>``.

A regular package (not a namespace one) so that the ``benchmarks`` module that some
third-party packages install into site-packages cannot shadow this folder.
"""
