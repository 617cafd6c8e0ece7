"""Split an operator at its constant inputs: the statements that compute only from them (a Winograd
convolution's filter transforms, from the weights) become a *prologue*, an operator of their own run
once per set of constants, and the rest the *body*, run at every call on what the prologue produced.

Inference frameworks do this with weights (oneDNN's and onnxruntime's pre-packed weights): a network's
weights do not change between calls, so the work that depends only on them need not be repeated.

The split is made on the abstract syntax, before checking, so each part is an ordinary operator: it is
checked, scheduled, tuned and compiled as any `.sw` operator is, with the directives of the schedule block
that name its statements, loops or tensors.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, replace

from swauto.frontend import ast
from swauto.primitives import REGISTRY as PRIMITIVES


@dataclass(frozen=True)
class ConstantSplit:
    """The two operators a split makes, and the tensors the prologue hands to the body."""

    prologue: ast.Operator
    body: ast.Operator
    handed: tuple[str, ...]  # local tensors of the whole the prologue computes and the body reads


def split_constants(operator: ast.Operator, constants: Collection[str]) -> ConstantSplit | None:
    """The prologue and body of a checked `operator` whose inputs `constants` do not change between calls,
    or None when no statement computes from them alone.

    The prologue is the longest run of statements at the start of the compute block (outside sequence
    loops) that read only constants and what earlier prologue statements wrote, and write only local
    tensors that no later statement writes: moving them out of the call changes no value the body reads.
    """
    local = {tensor.name for tensor in operator.tensors if tensor.local}
    accesses = [_accesses(statement) for statement in operator.compute]  # (reads, writes) of each
    produced: set[str] = set()
    count = 0
    for statement, (reads, writes) in zip(operator.compute, accesses, strict=True):
        if _holds_several(statement) or not reads <= set(constants) | produced or not writes <= local:
            break
        produced |= writes
        count += 1

    def written(statements: range) -> set[str]:
        return {name for index in statements for name in accesses[index][1]}

    # A statement after the prologue that writes what it wrote would make it change between calls.
    while count and written(range(count, len(accesses))) & written(range(count)):
        count -= 1
    if not count:
        return None
    passed = written(range(count)) & {name for reads, _ in accesses[count:] for name in reads}
    handed = tuple(t.name for t in operator.tensors if t.name in passed)
    head, rest = operator.compute[:count], operator.compute[count:]
    prologue = _part(operator, head, f"{operator.name}_prologue", outputs=set(handed), inputs=set())
    body = _part(operator, rest, operator.name, outputs=set(), inputs=set(handed))
    return ConstantSplit(prologue, body, handed)


def _part(operator: ast.Operator, compute: tuple[ast.Statement, ...], name: str, outputs: set[str],
          inputs: set[str]) -> ast.Operator:
    """`operator` reduced to `compute`: only the tensors it uses, those of `outputs` and `inputs` made
    arguments (no longer local), and only the directives that name its statements, loops or tensors."""
    used = {name for statement in compute for name in set().union(*_accesses(statement))}
    tensors = tuple(replace(t, local=t.local and t.name not in outputs | inputs) for t in operator.tensors
                    if t.name in used)
    names = {n for statement in compute for n in _names(statement)}
    schedule = tuple(d for d in (_directive_for(d, names, used) for d in operator.schedule) if d is not None)
    return replace(operator, name=name, tensors=tensors, compute=compute, schedule=schedule)


def _directive_for(directive: ast.Directive, names: set[str], tensors: set[str]) -> ast.Directive | None:
    """`directive` as it applies to a part whose statements and loops are `names` and whose tensors are
    `tensors`: itself, narrowed (a reorder listing loops of both parts) or None (another part's)."""
    if isinstance(directive, ast.Layout):
        return directive if directive.tensor in tensors else None
    if isinstance(directive, ast.Vectorize):
        return directive if directive.primitive in names else None
    if isinstance(directive, ast.Split):
        return directive if directive.target.parts[0] in names else None
    if isinstance(directive, ast.Fuse):  # (a fusion across the parts cannot be: it goes)
        return directive if {directive.source.parts[0], directive.into.parts[0]} <= names else None
    if directive.statement is not None:  # reorder <statement> any ...
        return directive if directive.statement in names else None
    if directive.order is None:  # reorder any: every statement of each part
        return directive
    order = tuple(target for target in directive.order if target.parts[0] in names)
    return replace(directive, order=order) if order else None


def _holds_several(statement: ast.Statement) -> bool:
    """Whether `statement` is a sequence loop (a loop around several statements, anywhere inside)."""
    while isinstance(statement, ast.ForLoop):
        if len(statement.body) != 1:
            return True
        statement = statement.body[0]
    return False


def _calls(statement: ast.Statement) -> Iterator[ast.Call]:
    if isinstance(statement, ast.Call):
        yield statement
        return
    for inner in statement.body:
        yield from _calls(inner)


def _names(statement: ast.Statement) -> Iterator[str]:
    """The statement names and loop variables in `statement` (what schedule directives name)."""
    if isinstance(statement, ast.Call):
        yield statement.name
        return
    yield statement.var
    for inner in statement.body:
        yield from _names(inner)


def _accesses(statement: ast.Statement) -> tuple[set[str], set[str]]:
    """The tensors `statement` reads and those it writes (an output it adds into is read too)."""
    reads: set[str] = set()
    writes: set[str] = set()
    for call in _calls(statement):
        signature = PRIMITIVES.get(call.primitive)
        if signature is None:  # (the whole operator was checked: never)
            continue
        for argument in call.arguments:
            value = argument.value
            if argument.name in signature.roles and isinstance(value, ast.Slice | ast.Name):  # a tensor, or a slice
                tensor = value.tensor if isinstance(value, ast.Slice) else value.id
                if argument.name == signature.output_role:
                    writes.add(tensor)
                    if argument.accumulate:
                        reads.add(tensor)
                else:
                    reads.add(tensor)
    return reads, writes
