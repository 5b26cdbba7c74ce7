"""DINO's self-distillation cross-entropy with a centred, sharpened teacher (Caron et al., ICCV 2021)."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ..validation import check_range
from .precision import in_float32


@in_float32
def dino_loss(
    student: torch.Tensor,
    teacher: torch.Tensor,
    center: torch.Tensor,
    student_temperature: float = 0.1,
    teacher_temperature: float | torch.Tensor = 0.04,
) -> torch.Tensor:
    """Cross-entropy between every teacher global view and every *other* student view.

    Args:
        student: `(V, B, K)` student outputs of V views; views `0..G-1` are the global crops, in the teacher's order.
        teacher: `(G, B, K)` teacher outputs of the G global crops.
        center: `(K,)` or `(1, K)` running centre of the teacher outputs, subtracted before sharpening.
        student_temperature, teacher_temperature: > 0 (the teacher's may be a 0-d tensor, the schedule's: it is not
            read back to be checked).

    Returns:
        `(B,)` per-sample loss: `sum_{g, v != g} H(softmax((t_g - c) / tau_t), softmax(s_v / tau_s))` divided by the
        number of (g, v) pairs.
    """
    if student.dim() != 3 or teacher.dim() != 3:
        raise ValueError(
            f"dino_loss: student must be (views, batch, K) and teacher (global views, batch, K), got "
            f"{tuple(student.shape)} and {tuple(teacher.shape)}."
        )
    if student.shape[1:] != teacher.shape[1:] or teacher.shape[0] > student.shape[0]:
        raise ValueError(
            f"dino_loss: teacher {tuple(teacher.shape)} and student {tuple(student.shape)} outputs do not match: "
            "they need the same batch and output dimension, and the student at least the teacher's global views."
        )
    check_range("dino_loss.student_temperature", student_temperature, low=0.0, low_inclusive=False)
    if not torch.is_tensor(teacher_temperature):
        check_range("dino_loss.teacher_temperature", teacher_temperature, low=0.0, low_inclusive=False)
    targets = F.softmax((teacher - center.reshape(1, 1, -1)) / teacher_temperature, dim=-1)  # (G, B, K)
    log_probs = F.log_softmax(student / student_temperature, dim=-1)  # (V, B, K)
    cross = -torch.einsum("gbk,vbk->gvb", targets, log_probs)  # (G, V, B)
    pairs = ~torch.eye(teacher.shape[0], student.shape[0], dtype=torch.bool, device=student.device)  # g != v
    # a mask product rather than cross[pairs]: boolean indexing has a data-dependent shape (a torch.compile break)
    return (cross * pairs.unsqueeze(-1)).sum(dim=(0, 1)) / pairs.sum()


class DINOLoss(nn.Module):
    """`dino_loss` with the teacher centre as a persistent buffer (saved and restored with checkpoints).

    The centre moves once per optimiser step: `forward` in training mode accumulates the teacher outputs of the
    micro-batches, `update_center` folds their mean in, `c <- m c + (1 - m) mean(t)`, summed over all processes
    when torch.distributed is initialised. With gradient accumulation this equals one step on the whole batch.

    Args:
        out_dim: K.
        center_momentum: m in [0, 1].
        student_temperature: tau_s > 0.
    """

    def __init__(self, out_dim: int, center_momentum: float = 0.9, student_temperature: float = 0.1):
        super().__init__()
        check_range("DINOLoss.center_momentum", center_momentum, low=0.0, high=1.0)
        check_range("DINOLoss.student_temperature", student_temperature, low=0.0, low_inclusive=False)
        self.center_momentum = center_momentum
        self.student_temperature = student_temperature
        self.register_buffer("center", torch.zeros(1, out_dim))
        self.register_buffer("_pending_sum", torch.zeros(out_dim), persistent=False)
        self.register_buffer("_pending_count", torch.zeros(()), persistent=False)

    def forward(self, student: torch.Tensor, teacher: torch.Tensor,
                teacher_temperature: float | torch.Tensor) -> torch.Tensor:
        """student `(V, B, K)`, teacher `(G, B, K)` -> `(B,)`."""
        loss = dino_loss(student, teacher, self.center, self.student_temperature, teacher_temperature)
        if self.training:
            with torch.no_grad():
                self._pending_sum += teacher.detach().float().sum(dim=(0, 1))
                self._pending_count += teacher.shape[0] * teacher.shape[1]
        return loss

    @torch.no_grad()
    def update_center(self) -> None:
        """Folds the teacher outputs seen since the last call into the centre (no-op when none were seen)."""
        total = torch.cat([self._pending_sum, self._pending_count.reshape(1)])
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(total)
        count = total[-1]
        # the centre stays where it was when nothing was seen, without reading the count on the host
        momentum = torch.where(count > 0, self.center_momentum, 1.0).to(self.center.dtype)
        batch_center = (total[:-1] / count.clamp_min(1)).to(self.center.dtype)
        self.center.mul_(momentum).add_(batch_center * (1 - momentum))
        self._pending_sum.zero_()
        self._pending_count.zero_()
