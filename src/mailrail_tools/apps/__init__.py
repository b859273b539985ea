"""Irregular applications on MailRail, each beside its bulk-synchronous ``Alltoallv`` peer.

:mod:`.cc` (connected components by asynchronous min-label propagation) and
:mod:`.moe` (Mixture-of-Experts token routing) are readable programs first:
``mailrail run -n 4 app cc`` / ``app moe`` run them, and their functions can be
imported.  :mod:`.frame` runs an application's trials in every flow-control
mode and its peer, verifies every result and writes the JSON document.
"""
