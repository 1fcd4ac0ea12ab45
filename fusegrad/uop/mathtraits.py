"""Python operators for graph builders: `UOp` and `UPat` both get `+ - * // % < & | ^ << >>` from `MathTrait`.

A subclass supplies `alu(op, *src)` (build a node) and `const_like(b)` (a constant shaped like self); every operator
is written once here in terms of those two, so patterns read exactly like the expressions they match. The operators
that mean the same on a Tensor (`OperatorTrait`: `a + b` is `a.add(b)`) are Tensor's too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from fusegrad.uop import Ops


class OperatorTrait:
    """Python operators as calls of named methods (`a + b` is `a.add(b)`, `2 - a` is `a.sub(2, True)`), shared by
    UOp (through MathTrait) and Tensor. `//`, `%`, `<=` and `>=` are not here: on nodes they are C's division and
    not-less-than, on tensors Python's floor division and an ordered comparison (False against NaN)."""

    __slots__ = ()

    if TYPE_CHECKING:  # the named methods a class with these operators provides

        def neg(self) -> Self: ...
        def add(self, x: Any, reverse: bool = False) -> Self: ...
        def sub(self, x: Any, reverse: bool = False) -> Self: ...
        def mul(self, x: Any, reverse: bool = False) -> Self: ...
        def div(self, x: Any, reverse: bool = False) -> Self: ...
        def bitwise_and(self, x: Any, reverse: bool = False) -> Self: ...
        def bitwise_or(self, x: Any, reverse: bool = False) -> Self: ...
        def bitwise_xor(self, x: Any, reverse: bool = False) -> Self: ...
        def lshift(self, x: Any, reverse: bool = False) -> Self: ...
        def rshift(self, x: Any, reverse: bool = False) -> Self: ...
        def lt(self, x: Any) -> Self: ...
        def gt(self, x: Any) -> Self: ...

    def __neg__(self) -> Self:
        return self.neg()

    def __add__(self, x: Any) -> Self:
        return self.add(x)

    def __radd__(self, x: Any) -> Self:
        return self.add(x, True)

    def __sub__(self, x: Any) -> Self:
        return self.sub(x)

    def __rsub__(self, x: Any) -> Self:
        return self.sub(x, True)

    def __mul__(self, x: Any) -> Self:
        return self.mul(x)

    def __rmul__(self, x: Any) -> Self:
        return self.mul(x, True)

    def __truediv__(self, x: Any) -> Self:
        return self.div(x)

    def __rtruediv__(self, x: Any) -> Self:
        return self.div(x, True)

    def __and__(self, x: Any) -> Self:
        return self.bitwise_and(x)

    def __rand__(self, x: Any) -> Self:
        return self.bitwise_and(x, True)

    def __or__(self, x: Any) -> Self:
        return self.bitwise_or(x)

    def __ror__(self, x: Any) -> Self:
        return self.bitwise_or(x, True)

    def __xor__(self, x: Any) -> Self:
        return self.bitwise_xor(x)

    def __rxor__(self, x: Any) -> Self:
        return self.bitwise_xor(x, True)

    def __lshift__(self, x: Any) -> Self:
        return self.lshift(x)

    def __rlshift__(self, x: Any) -> Self:
        return self.lshift(x, True)

    def __rshift__(self, x: Any) -> Self:
        return self.rshift(x)

    def __rrshift__(self, x: Any) -> Self:
        return self.rshift(x, True)

    def __lt__(self, x: Any) -> Self:
        return self.lt(x)

    def __gt__(self, x: Any) -> Self:
        return self.gt(x)


class MathTrait(OperatorTrait):
    """Operator overloading in terms of `alu` and `const_like`."""

    __slots__ = ()

    def alu(self, op: Ops, *src: Self) -> Self:
        raise NotImplementedError(f"{type(self).__name__} must implement alu")

    def const_like(self, b: Any) -> Self:
        raise NotImplementedError(f"{type(self).__name__} must implement const_like")

    def ufix(self, x: Any) -> Self:
        """Lift a Python constant to a node like self; nodes pass through."""
        return x if isinstance(x, MathTrait) else self.const_like(x)  # type: ignore[return-value]  # same family

    def _binop(self, op: Ops, x: Any, reverse: bool) -> Self:
        return self.ufix(x).alu(op, self) if reverse else self.alu(op, self.ufix(x))

    # arithmetic
    def add(self, x: Any, reverse: bool = False) -> Self:
        return self._binop(Ops.ADD, x, reverse)

    def mul(self, x: Any, reverse: bool = False) -> Self:
        return self._binop(Ops.MUL, x, reverse)

    def neg(self) -> Self:
        return self * -1

    def sub(self, x: Any, reverse: bool = False) -> Self:
        # a - b is a + b*-1: the simplifier only needs rules for ADD and MUL
        return self.ufix(x).alu(Ops.ADD, -self) if reverse else self.alu(Ops.ADD, -self.ufix(x))

    def idiv(self, x: Any, reverse: bool = False) -> Self:
        return self._binop(Ops.IDIV, x, reverse)

    def mod(self, x: Any, reverse: bool = False) -> Self:
        return self._binop(Ops.MOD, x, reverse)

    def div(self, x: Any, reverse: bool = False) -> Self:
        return (self.ufix(x) * self.reciprocal()) if reverse else (self * self.ufix(x).reciprocal())

    def maximum(self, x: Any) -> Self:
        return self.alu(Ops.MAX, self.ufix(x))

    def minimum(self, x: Any) -> Self:
        return -((-self).maximum(-self.ufix(x)))

    # comparisons and logic
    def lt(self, x: Any) -> Self:
        return self.alu(Ops.CMPLT, self.ufix(x))

    def gt(self, x: Any) -> Self:
        return self.ufix(x).alu(Ops.CMPLT, self)

    def ne(self, x: Any) -> Self:
        return self.alu(Ops.CMPNE, self.ufix(x))

    def eq(self, x: Any) -> Self:
        return self.alu(Ops.CMPEQ, self.ufix(x))

    def logical_not(self) -> Self:
        return self.ne(True)

    def bitwise_and(self, x: Any, reverse: bool = False) -> Self:
        return self._binop(Ops.AND, x, reverse)

    def bitwise_or(self, x: Any, reverse: bool = False) -> Self:
        return self._binop(Ops.OR, x, reverse)

    def bitwise_xor(self, x: Any, reverse: bool = False) -> Self:
        return self._binop(Ops.XOR, x, reverse)

    def lshift(self, x: Any, reverse: bool = False) -> Self:
        return self._binop(Ops.SHL, x, reverse)

    def rshift(self, x: Any, reverse: bool = False) -> Self:
        return self._binop(Ops.SHR, x, reverse)

    def where(self, x: Any, y: Any) -> Self:
        # the branches fix the dtype, so a constant branch is lifted like the other branch
        if isinstance(x, MathTrait):
            return self.alu(Ops.WHERE, x, x.ufix(y))  # type: ignore[arg-type]  # same family
        if isinstance(y, MathTrait):
            return self.alu(Ops.WHERE, y.ufix(x), y)  # type: ignore[arg-type]  # same family
        raise TypeError(f"where: at least one branch must be a node, got {type(x).__name__} and {type(y).__name__}")

    # unary math
    def exp2(self) -> Self:
        return self.alu(Ops.EXP2)

    def log2(self) -> Self:
        return self.alu(Ops.LOG2)

    def sqrt(self) -> Self:
        return self.alu(Ops.SQRT)

    def sin(self) -> Self:
        return self.alu(Ops.SIN)

    def reciprocal(self) -> Self:
        return self.alu(Ops.RECIPROCAL)

    def trunc(self) -> Self:
        return self.alu(Ops.TRUNC)

    # Python operators that differ from a Tensor's (OperatorTrait has the rest): C division, not-less-than
    def __floordiv__(self, x: Any) -> Self:
        return self.idiv(x)

    def __rfloordiv__(self, x: Any) -> Self:
        return self.idiv(x, True)

    def __mod__(self, x: Any) -> Self:
        return self.mod(x)

    def __rmod__(self, x: Any) -> Self:
        return self.mod(x, True)

    def __ge__(self, x: Any) -> Self:
        return self.lt(x).logical_not()

    def __le__(self, x: Any) -> Self:
        return self.gt(x).logical_not()
