"""Full DPO (preference tuning) sharded with FSDP2.   ftune run --nproc_per_node 2 full_dpo_distributed --config smollm2/135M_full_dpo

Every weight trains on pairs of answers (chosen, rejected) with the config's `loss`
(ftune.training.DPOLoss: sigmoid DPO, IPO, or reference-free SimPO). The reference model is the
base checkpoint, frozen (also on a resumed run), sharded over the ranks like the policy. The step's loss is
the mean over the pairs of every rank; validation on dataset_val's pairs is that of
lora_dpo_single_device (training.validate over the step's loss_on). This is full_finetune_distributed with lines tagged # [dpo]
in place of the supervised lines tagged # [sft] (tests/recipes/test_skeleton.py checks it).
"""

import torch

from ftune import checkpointing, config, data, training

# The settings this recipe reads (keys, types, defaults, help). A copy may define its own dataclass
# (subclass this one, add fields with config.setting): `ftune run/validate/--help` read it from here.
SETTINGS = training.FullSettings  # [full]


def main(cfg: config.Config) -> None:
    s = cfg.settings(SETTINGS)
    training.seed_everything(s.seed)
    device = training.get_device(s.device)
    info = training.init_distributed(device, timeout_s=s.dist_timeout_s)  # [dist]
    mesh = training.device_mesh(device, info, s.tensor_parallel_dim, s.context_parallel_dim)  # [dist]
    dtype = training.resolve_dtype(s.dtype, cfg, device)  # says which is faster here; "auto" picks
    ckpt = config.instantiate(cfg.checkpointer)
    loaded = ckpt.load()  # the base model, or the newest step folder with resume_from_checkpoint=auto

    model = training.build_model(
        cfg.model, loaded.model, device=device, dtype=dtype, checkpoint_dir=ckpt.checkpoint_dir
    )  # config.json is checked against the model the config builds
    reference = training.ReferenceModel.frozen(  # [ref+full] the base checkpoint, frozen (also resuming)
        training.build_model(
            cfg.model, ckpt.load_base_model(), device=device, dtype=dtype, checkpoint_dir=ckpt.checkpoint_dir
        )
    )
    if s.activation_checkpointing:
        training.apply_activation_checkpointing(model)
    if s.activation_offloading:
        training.apply_activation_offloading(model, device)
    training.shard_model(model, s.fsdp_reshard_after_forward, s.fsdp_cpu_offload, mesh=mesh)  # [dist]
    training.shard_model(  # [ref+full+dist] the reference, sharded (and split) like the policy
        reference.model, s.fsdp_reshard_after_forward, s.fsdp_cpu_offload, mesh=mesh
    )
    if s.compile:
        training.compile_model(model)

    tokenizer = config.instantiate(cfg.tokenizer)
    checkpointing.check_tokenizer_fits(tokenizer.vocab_size, model)
    collate = training.build_preference_collate(cfg.collate_fn, tokenizer.pad_id)  # [dpo]
    loader = data.build_dataloader(
        config.instantiate(cfg.dataset, tokenizer),
        batch_size=s.batch_size,
        collate_fn=collate,
        shuffle=s.shuffle,
        seed=s.seed,
        rank=mesh.data_rank,  # [dist] tp and cp ranks of a row read the same batch
        world_size=mesh.data_ranks,  # [dist]
    )
    val_loader = training.validation_loader(
        config.instantiate(cfg.dataset_val, tokenizer), batch_size=s.batch_size, collate_fn=collate
    )

    loss_fn = config.instantiate(cfg.loss)
    if s.compile:
        loss_fn = training.compile_loss(loss_fn)

    def loss_on(batch: training.MicroBatch) -> training.Loss:
        """A micro-batch's forward and loss: the training step and validation both call this."""
        reference_logps = reference.row_logps(loss_fn, batch)  # [dpo] no grad; None for SimPO
        hidden = model.hidden(batch.tokens, **batch.model_inputs)  # (b, s, dim); images when it has them
        return training.preference_loss(  # [dpo] pair losses, rewards, log-prob accuracies
            loss_fn, model, hidden, batch, reference_logps
        )

    params = training.trainable_params(model)
    optimizer = training.build_optimizer(cfg.optimizer, params, in_backward=s.optimizer_in_backward)
    steps = training.total_steps(
        max_steps=s.max_steps,
        epochs=s.epochs,
        batches_per_epoch=len(loader),
        grad_accum_steps=s.grad_accum_steps,
    )
    scheduler = config.instantiate(cfg.lr_scheduler, optimizer, num_training_steps=steps)
    step = training.restore(
        loaded.recipe_state, model=model, optimizer=optimizer, scheduler=scheduler, loader=loader
    )
    report = training.Reporter(
        config.instantiate(cfg.metric_logger),
        total=steps,
        initial=step,
        device=device,
        log_every_n_steps=s.log_every_n_steps,
        progress_bar=s.progress_bar,
    )

    def save(step: int) -> None:
        run = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "loader": loader}
        training.save_checkpoint(ckpt, step, **run)  # [full]

    profile = training.Profiler(enabled=s.profile, output_dir=f"{s.output_dir}/profile")
    stop = training.StopOnSignal(s.stop_grace_s)  # SIGTERM / Ctrl-C: save, then stop (a bounded wait)
    with profile as profiler, stop:
        while step < steps and not stop.stopped:
            for micro_batches in training.accumulate(loader, s.grad_accum_steps, device=device):
                # The training step. StepLoss divides by the step's count (all micro-batches, all
                # ranks) and refuses a non-finite loss or gradient norm.
                step_loss = training.StepLoss(  # [dpo] a mean over the step's pairs
                    micro_batches, optimizer, step=step + 1, device=device, per=training.per_pair
                )
                for batch in micro_batches:
                    step_loss.scaled(loss_on(batch)).backward()
                grad_norm = None
                if s.clip_grad_norm is not None:
                    grad_norm = torch.nn.utils.clip_grad_norm_(params, s.clip_grad_norm)
                stats = step_loss.finish(grad_norm)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                if scheduler is not None:
                    scheduler.step()
                step += 1

                report.step(step, stats, training.count_tokens(micro_batches))
                profiler.step()
                if val_loader is not None and training.every(step, s.run_val_every_n_steps):
                    val = training.validate(
                        loss_on, model, val_loader, device=device, max_batches=s.max_val_batches
                    )
                    report.log(step, val)
                if step == steps or stop.check():
                    break
                if training.every(step, s.save_every_n_steps):
                    save(step)
    save(step)
    report.close()
    training.destroy_distributed()  # [dist]
    stop.exit_if_stopped(step, s.output_dir)


if __name__ == "__main__":
    config.run(main)
