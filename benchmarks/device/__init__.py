"""The GPU kit: the wheelhouse a GPU machine without a package index needs (``wheelhouse``),
and the one command that installs it there and measures (``kit``, ``run.sh``)."""
