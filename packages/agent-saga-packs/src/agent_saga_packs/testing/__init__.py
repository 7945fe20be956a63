"""Stand-ins for the systems the packs act on, for tests and examples.

Each keeps its state in a file, so the effects of a process that was killed (the chaos
runner's kill points) are still there for the checks: a bank and a medication order book in
SQLite, and a servo arm with physical limits.
"""

from ._bank import BankError, LedgerBank
from ._orders import OrderError, SQLiteOrderBook
from ._servo import ServoFault, SimulatedServo

__all__ = [
    "BankError",
    "LedgerBank",
    "OrderError",
    "SQLiteOrderBook",
    "ServoFault",
    "SimulatedServo",
]
