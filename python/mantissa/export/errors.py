"""The one error the exporter raises for bad input."""


class ExportError(Exception):
    """A model, batch or graph the exporter refuses, with what and where.

    The message names the model and the argument, node or module at fault;
    the CLI prints it as one line and exits 1. Nothing has been written to
    the output folder when this is raised.
    """
