"""Ready-made agent-saga tools for five kinds of agents, one module per pack.

* :mod:`agent_saga_packs.git`: branches, commits, pushes, pull requests and merges (the
  ``git`` binary, PyGithub, python-gitlab; extra ``git``);
* :mod:`agent_saga_packs.aws`: EC2 instances, S3 buckets and objects, IAM roles (boto3;
  extra ``aws``);
* :mod:`agent_saga_packs.payments`: refundable charges and irreversible wires;
* :mod:`agent_saga_packs.clinical`: medication orders with unit-normalised dose limits;
* :mod:`agent_saga_packs.robotics`: arm moves within joint, speed and battery bounds.

Each declares its tools' semantics, compensations and probes, and offers gate rules built
from the core's library. Importing this package imports no client library.
"""

from ._duplicates import DuplicateWithin, RecentEffects

__version__ = "0.1.0"

__all__ = ["DuplicateWithin", "RecentEffects", "__version__"]
