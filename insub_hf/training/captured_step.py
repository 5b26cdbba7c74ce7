"""One training step as one compiled graph (`InSubTrainingArguments.capture_step`): the views, forward, backward,
gradient clipping and AdamW's update, so that on a GPU it replays as one CUDA graph
(`torch_compile_mode="reduce-overhead"`) instead of launching a few thousand kernels from Python.

What makes a step capturable, and where each part lives:
- static shapes: every batch has the same size (`dataloader_drop_last=True`, set by the arguments);
- random numbers drawn on the device inside the graph, from the generator `seeded_draws` seeds per step, so two
  steps draw different views and a resumed run draws the same ones;
- `CapturedAdamW`: AdamW with its learning rate as a tensor the scheduler writes in place (a float would be baked
  into the graph, and recompile at every change), capturable on CUDA; its update runs inside the graph and its
  `step()`, called by the Trainer afterwards, only marks the step done;
- no host read: the loss, the gradient norm and the batch checks stay on the device until a logging step.
The Trainer's own loop runs around it (callbacks, schedules, logging, checkpoints); `CapturedStepMixin` replaces
only what happens inside one optimiser step.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.optim.adam import adam

from ..data.batch_views import view_inputs
from ..data.seeding import mix_seed, seeded_draws
from ..losses.step_checks import training_step_flags
from ..processing.image_range import check_unit_images

__all__ = ["CapturedAdamW", "CapturedStepMixin", "captured_step_problem"]


def captured_step_problem() -> str | None:
    """Why this torch cannot trace a whole step (backward included) into one graph, or None when it can."""
    if not hasattr(torch._dynamo.config, "trace_autograd_ops"):
        return (f"torch {torch.__version__} cannot trace a backward pass into a compiled graph "
                "(torch._dynamo.config.trace_autograd_ops is missing)")
    return None


class CapturedAdamW(torch.optim.AdamW):
    """`torch.optim.AdamW` whose update runs inside the captured step (`update`), with the learning rate of each
    parameter group as a 0-d tensor on the parameters' device (the Trainer's scheduler fills it in place).

    On CUDA the update is `capturable` (its step counters stay on the device) and multi-tensor; on a CPU it runs one
    tensor at a time (torch's multi-tensor AdamW takes a tensor learning rate only when capturable, which needs CUDA).
    `step()` after a captured update does nothing: the weights have moved already. Called without one (the Trainer
    outside the captured path), it is AdamW's step.
    """

    def __init__(self, params, lr: float, device: torch.device, **kwargs):
        self.on_gpu = torch.device(device).type == "cuda"
        super().__init__(params, lr=torch.tensor(float(lr), device=device), capturable=self.on_gpu,
                         foreach=self.on_gpu, **kwargs)
        self.updated = False

    def init_state(self) -> None:
        """AdamW's state of every parameter (moments, step counter), made before the first step is traced so that
        the graph reads and updates tensors that live as long as the optimiser."""
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32, device=p.device if self.on_gpu else "cpu")
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                # the graph updates them in place at fixed addresses: a CUDA graph may replay over them
                for tensor in state.values():
                    torch._dynamo.mark_static_address(tensor)
            torch._dynamo.mark_static_address(group["lr"])

    @torch.no_grad()
    def update(self) -> None:
        """AdamW's update from the parameters' `.grad`, traceable: torch's functional AdamW over each group."""
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            states = [self.state[p] for p in params]
            adam(params, [p.grad for p in params], [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
                 [], [s["step"] for s in states], foreach=self.on_gpu, capturable=self.on_gpu,
                 decoupled_weight_decay=True, amsgrad=False, beta1=group["betas"][0], beta2=group["betas"][1],
                 lr=group["lr"], weight_decay=group["weight_decay"], eps=group["eps"], maximize=False)

    def step(self, closure=None):
        if self.updated:
            self.updated = False
            return None
        return super().step(closure)

    def load_state_dict(self, state_dict: dict) -> None:
        """AdamW's saved state, from a captured run or an uncaptured one (a resumed run may turn `capture_step` on):
        the moments and step counters as saved, the learning rate written into this optimiser's own tensor (the graph
        reads it there; an uncaptured run saved a float) and the update's settings kept as this optimiser runs it."""
        kept = [(group["lr"], group["capturable"], group["foreach"]) for group in self.param_groups]
        super().load_state_dict(state_dict)
        for group, (lr, capturable, foreach) in zip(self.param_groups, kept):
            lr.fill_(float(group["lr"]))
            group.update(lr=lr, capturable=capturable, foreach=foreach)
            for p in group["params"]:  # a capturable update keeps its step counters beside the parameters
                state = self.state.get(p, {})
                if "step" in state:
                    state["step"] = state["step"].to(torch.float32).to(p.device if capturable else "cpu")


class CapturedStepMixin:
    """The `InSubTrainer` side of `capture_step`: builds `CapturedAdamW`, compiles the step once, and runs it in
    `training_step`; the Trainer's clipping returns the step's gradient norm and its optimiser step only marks the
    update done."""

    _captured = None
    _captured_model = None
    _captured_grad_norm = None

    @property
    def capturing(self) -> bool:
        """Whether the arguments ask for the captured step (plain `TrainingArguments` have no such field)."""
        return bool(getattr(self.args, "capture_step", False))

    @property
    def captured_optimizer(self) -> CapturedAdamW:
        """The `CapturedAdamW` under accelerate's wrapper."""
        return getattr(self.optimizer, "optimizer", self.optimizer)

    def check_capture_inputs(self) -> None:
        """The captured step makes its views inside the graph: refused, before any training, without `batch_views`."""
        if self.capturing and self.batch_views is None:
            raise ValueError(
                "InSubTrainingArguments.capture_step=True makes the views inside the captured step: it needs "
                "InSubTrainer(batch_views=...) (e.g. BatchTwoViews) and a training set of plain images."
            )

    def check_capture_optimizer(self) -> None:
        """The captured step runs its own AdamW: refused, before any training, with an optimiser passed in."""
        given = self.optimizer if self.optimizer is not None else getattr(self, "optimizer_cls_and_kwargs", None)
        if self.capturing and given is not None and not isinstance(given, CapturedAdamW):
            name = type(given).__name__ if self.optimizer is not None else given[0].__name__
            raise ValueError(
                f"InSubTrainingArguments.capture_step=True runs its own AdamW inside the captured step (its learning "
                f"rate, betas, eps and weight decay from the arguments); InSubTrainer was given a {name} "
                "(optimizers=...): leave the optimiser out, or set capture_step=False to train with it."
            )

    def create_optimizer(self, model=None):
        optimizer = super().create_optimizer(model)
        if not self.capturing:
            return optimizer
        groups = [{"params": g["params"], "weight_decay": g["weight_decay"]} for g in optimizer.param_groups]
        defaults = optimizer.defaults
        self.optimizer = CapturedAdamW(groups, self.args.learning_rate, self.args.device,
                                       betas=defaults["betas"], eps=defaults["eps"])
        return self.optimizer

    def _get_learning_rate(self) -> float:
        """The scheduled learning rate from the host's schedule: reading the tensor would wait for the device."""
        scheduler = self.lr_scheduler
        if self.capturing and isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
            return self.args.learning_rate * scheduler.lr_lambdas[0](scheduler.last_epoch)
        return super()._get_learning_rate()

    def _clip_grad_norm(self, model):
        if self.capturing and self._captured_grad_norm is not None:
            norm, self._captured_grad_norm = self._captured_grad_norm, None
            return norm  # clipped inside the captured step
        return super()._clip_grad_norm(model)

    def captured_step(self, model: nn.Module, images: torch.Tensor):
        """The compiled step: `images (B, C, H, W)` in [0, 1] -> (loss, side metrics, gradient norm, check flags),
        all on the device; the weights and AdamW's state are updated in place."""
        if not self.batch_views.range_checked:  # once, before tracing: it reads the values on the host
            check_unit_images(images, "InSubTrainer with batch_views: the training batch's pixel_values")
            self.batch_views.range_checked = True
        if self._captured is None or model is not self._captured_model:
            self._captured_model = model
            self._captured = torch.compile(self._step_function(model), backend=self.args.torch_compile_backend or
                                           "inductor", mode=self.args.torch_compile_mode, fullgraph=True)
        with torch._dynamo.config.patch(trace_autograd_ops=True):
            return self._captured(images)

    def _step_function(self, model: nn.Module):
        optimizer = self.captured_optimizer
        optimizer.init_state()
        params = [p for group in optimizer.param_groups for p in group["params"]]
        batch_views, max_norm = self.batch_views, self.args.max_grad_norm
        side = self.side_metric_names

        def step(images: torch.Tensor):
            inputs = view_inputs(batch_views, images.float())
            outputs = model(**inputs)
            loss = outputs["loss"]
            loss.backward()
            # the norm before clipping, as the Trainer's; max_grad_norm 0 measures it without clipping
            grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf"))
            optimizer.update()
            metrics = {name: outputs[name].detach().mean() for name in side if outputs.get(name) is not None}
            return loss.detach(), metrics, grad_norm, training_step_flags(loss, inputs)

        return step

    def training_step(self, model, inputs, num_items_in_batch=None):
        if not self.capturing:
            return super().training_step(model, inputs, num_items_in_batch)
        model.train()
        inputs = self._prepare_inputs(inputs)
        images = inputs["pixel_values"]
        seed = mix_seed(self._view_seed, self.state.global_step, 0, self.args.process_index)
        inner = getattr(model, "_orig_mod", model)  # the step is compiled whole, not around a compiled forward
        torch.compiler.cudagraph_mark_step_begin()  # one replay per optimiser step
        with seeded_draws(seed, images.device), self.compute_loss_context_manager():
            loss, metrics, grad_norm, (loss_bad, largest) = self.captured_step(inner, images)
        # a CUDA graph's outputs are overwritten by its next replay: what is read at a later logging step is copied
        for name, value in metrics.items():
            self._side_metrics["train"][name].append(value.clone())
        self.merge_pending_check(loss_bad.clone(), {name: value.clone() for name, value in largest.items()})
        self._captured_grad_norm = grad_norm.clone()
        loss = loss.clone()
        self.captured_optimizer.updated = True
        return loss
