"""Where traces come from when they are not files: Jaeger's and Tempo's query APIs over HTTP.

Kept beside ``cli/``, outside ``analyze/``: the analyzer is pure (records in, findings and
text out) and never touches the network. The CLI fetches documents here and hands them to
``analyze.readers.read_documents``. Importing this package loads no HTTP code: the defaults
below are what ``--help`` shows; ``live`` (http.client, ssl) loads only for ``--jaeger`` /
``--tempo``.
"""

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_LIMIT = 20
