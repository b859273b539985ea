"""Connected components of an edge-list file, from a program of your own.

mailrail run -n 4 -- python examples/components_of_a_file.py graph.txt[.gz]
"""

import argparse
import sys

from mpi4py import MPI

from mailrail import MailRail
from mailrail_tools.apps import cc

parser = argparse.ArgumentParser()
parser.add_argument("edges", help="'u v' lines (plain or .gz) or an (m, 2) .npy array")
args = parser.parse_args()
comm = MPI.COMM_WORLD
# The app's own flags, with our file: scale, seed and the rest keep their defaults.
options = cc.parse_arguments(["--edges", args.edges])
graph = cc.ConnectedComponents(comm, options)
with MailRail(comm, flow_control="node") as rail:
    figures = graph.run_mailrail(rail)
    correct = graph.verify()
components = graph.components()
if comm.Get_rank() == 0:
    print(
        f"{components} components, {figures['rounds']} rounds, {figures['messages']} messages, "
        f"{'verified' if correct else 'WRONG'}"
    )
sys.exit(0 if correct else 1)
