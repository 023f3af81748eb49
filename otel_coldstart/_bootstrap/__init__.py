"""The directory ``otel-coldstart run`` puts first on ``PYTHONPATH``: its ``sitecustomize``
instruments every Python process the command starts. Not imported as a package."""
