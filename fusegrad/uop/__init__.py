"""The op vocabulary of the UOp IR: `Ops`, the `GroupOp` families rules dispatch on, and loop `AxisType`s.

Kept free of imports so every other module (patterns, rewrites, the UOp class) can depend on it.
"""

from __future__ import annotations

from enum import Enum, auto


class Ops(Enum):
    """Every operation a UOp can be; the order only groups related ops."""

    # defines and special values
    DEFINE_GLOBAL = auto()
    DEFINE_VAR = auto()
    BIND = auto()
    SPECIAL = auto()
    DEFINE_LOCAL = auto()
    DEFINE_REG = auto()
    # structure
    NOOP = auto()
    SINK = auto()
    GROUP = auto()
    AFTER = auto()
    UNIQUE = auto()
    DEVICE = auto()
    KERNEL = auto()
    CUSTOM = auto()
    CUSTOMI = auto()
    PRECAST = auto()
    REWRITE_ERROR = auto()
    # vector lanes
    GEP = auto()
    VECTORIZE = auto()
    CAT = auto()
    PTRCAT = auto()
    UNROLL = auto()
    CONTRACT = auto()
    # movement (tensor level)
    RESHAPE = auto()
    PERMUTE = auto()
    EXPAND = auto()
    PAD = auto()
    SHRINK = auto()
    FLIP = auto()
    # multi-device
    MULTI = auto()
    MSELECT = auto()
    MSTACK = auto()
    ALLREDUCE = auto()
    # buffers and realization (tensor level)
    BUFFER = auto()
    BUFFER_VIEW = auto()
    BUFFERIZE = auto()
    COPY = auto()
    ASSIGN = auto()
    CONTIGUOUS = auto()
    CONTIGUOUS_BACKWARD = auto()
    DETACH = auto()
    FUSE = auto()
    IOTA = auto()  # tensor level: 0, 1, ..., n-1 (arange without a reduction)
    # reductions
    REDUCE_AXIS = auto()
    REDUCE = auto()
    WMMA = auto()
    # memory and control flow (kernel level)
    INDEX = auto()
    LOAD = auto()
    STORE = auto()
    RANGE = auto()
    END = auto()
    IF = auto()
    ENDIF = auto()
    BARRIER = auto()
    # programs
    LINEAR = auto()
    SOURCE = auto()
    BINARY = auto()
    PROGRAM = auto()
    # unary ALU
    CAST = auto()
    BITCAST = auto()
    EXP2 = auto()
    LOG2 = auto()
    SIN = auto()
    SQRT = auto()
    RECIPROCAL = auto()
    NEG = auto()
    TRUNC = auto()
    # binary ALU
    ADD = auto()
    MUL = auto()
    SHL = auto()
    SHR = auto()
    IDIV = auto()
    MAX = auto()
    MOD = auto()
    CMPLT = auto()
    CMPNE = auto()
    CMPEQ = auto()
    XOR = auto()
    OR = auto()
    AND = auto()
    THREEFRY = auto()
    SUB = auto()
    FDIV = auto()
    POW = auto()
    # ternary ALU
    WHERE = auto()
    MULACC = auto()
    # constants
    VCONST = auto()
    CONST = auto()

    # identity hashing: Enum's default hashes the member name in Python code, and ops are hashed on every node build
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"Ops.{self.name}"


class GroupOp:
    """Sets of ops that rules and passes treat alike."""

    Unary = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC})
    Binary = frozenset(
        {Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MAX, Ops.MOD, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.XOR, Ops.SHL, Ops.SHR,
         Ops.OR, Ops.AND, Ops.THREEFRY, Ops.SUB, Ops.FDIV, Ops.POW}
    )  # fmt: skip
    Ternary = frozenset({Ops.WHERE, Ops.MULACC})
    ALU = Unary | Binary | Ternary
    Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
    Irreducible = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.RANGE})
    Movement = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP})
    Buffer = frozenset({Ops.LOAD, Ops.STORE, Ops.CONST, Ops.DEFINE_VAR})
    Defines = frozenset({Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.DEFINE_REG})
    # a op b == b op a
    Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.XOR, Ops.AND, Ops.OR})
    # (a op b) op c == a op (b op c)
    Associative = frozenset({Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.MAX})
    # a op a == a
    Idempotent = frozenset({Ops.OR, Ops.AND, Ops.MAX})
    Comparison = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
    # f(0) != 0: padding with zeros before these ops changes the result
    UnsafePad = frozenset({Ops.RECIPROCAL, Ops.LOG2, Ops.EXP2, Ops.IDIV, Ops.POW})
    All = frozenset(Ops)


class AxisType(Enum):
    """What a RANGE loop is used for; decides its place in the loop nest and its letter in kernel names."""

    GLOBAL = auto()
    THREAD = auto()
    LOCAL = auto()
    WARP = auto()
    LOOP = auto()
    GROUP_REDUCE = auto()
    REDUCE = auto()
    UPCAST = auto()
    UNROLL = auto()
    MULTI = auto()

    def __repr__(self) -> str:
        return f"AxisType.{self.name}"


# axis types whose loops close inside the output loops (they carry an accumulator)
REDUCE_AXES = frozenset({AxisType.REDUCE, AxisType.GROUP_REDUCE, AxisType.UNROLL})

axis_letters = {AxisType.GLOBAL: "g", AxisType.THREAD: "t", AxisType.LOCAL: "l", AxisType.WARP: "w", AxisType.LOOP: "L",
                AxisType.UPCAST: "u", AxisType.GROUP_REDUCE: "G", AxisType.REDUCE: "R", AxisType.UNROLL: "r",
                AxisType.MULTI: "m"}  # fmt: skip
axis_colors = {AxisType.GLOBAL: "blue", AxisType.THREAD: "BLUE", AxisType.LOCAL: "cyan", AxisType.WARP: "CYAN",
               AxisType.LOOP: "WHITE", AxisType.UPCAST: "yellow", AxisType.GROUP_REDUCE: "RED", AxisType.REDUCE: "red",
               AxisType.UNROLL: "magenta", AxisType.MULTI: "GREEN"}  # fmt: skip
