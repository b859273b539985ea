"""``mailrail simulate``: a calibrated discrete-event model of MailRail jobs at any size (see :mod:`.model`).

A distribution of its own (``mailrail-simulate``, or ``pip install 'mailrail[simulate]'``), so that the measured
runs it is fitted to and validated on (``data/``) ship only where the model is installed.  The model runs
MailRail's own sans-I/O core (:class:`mailrail.protocol.Endpoint` and :mod:`mailrail.flow`) and imports no MPI;
:mod:`.measure` holds the MPI experiments that measured its parameters.
"""

__version__ = "0.1.0"
