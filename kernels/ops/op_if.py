"""If: run then_branch or else_branch (each sees the enclosing scope) and return its outputs."""
from .base import REQUIRED, Kernel


class If_1(Kernel):
    attributes = {"then_branch": REQUIRED, "else_branch": REQUIRED}
    needs_scope = True

    def run(self, cond, scope=None):
        branch = self.then_branch if bool(self.first(cond)) else self.else_branch
        return tuple(branch.run([], branch.bind(scope), scope))   # a branch has no formal inputs
