"""``mailrail simulate``: a calibrated discrete-event model of MailRail jobs at any size (see :mod:`.model`)."""
