"""Zoology (HazyResearch/zoology) as a peer, run in this process on the same GPU as zoo.

Zoology is not a dependency: point ``--zoology`` at a checkout (it needs pydantic, einops and
torchvision; wandb is stubbed when missing since nothing is logged). Measured with commit dbcb60d:
the newest commit (d88d6f5) makes ``LanguageModel.forward`` return hidden states by default, which
breaks its own cross-entropy training path. Its own functions do the work:
``prepare_data`` generates the MQAR split, its ``LanguageModel`` and ``Trainer.train_epoch`` train.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import time
import types

import torch

# The zoo settings that build the peer's model (its figure-2 attention run below): Zoology's TransformerBlock with its
# Identity state mixer, which adds norm2(x) after every block, and its default embedding dropout 0.1. The sweeps'
# bases may differ (the committed grid: state_mixer identity, embed_dropout 0); zoo's side of the comparison does not.
ZOOLOGY_MODEL = {"model.state_mixer": "normed", "model.embed_dropout": 0.1}


def _import_zoology(path: str | None):
    """Zoology's modules. zoology.logger imports wandb, which we never use: without wandb installed a
    stand-in module is present only while Zoology is imported, then removed again, so that packages
    that probe for wandb later in this process (Lightning does) still see that it is missing."""
    if path:
        sys.path.insert(0, path)
    stub = importlib.util.find_spec("wandb") is None
    if stub:
        sys.modules["wandb"] = types.ModuleType("wandb")
        sys.modules["wandb"].__spec__ = importlib.machinery.ModuleSpec("wandb", None)
    try:
        from zoology import config, model, train
        from zoology.data import multiquery_ar, utils
    finally:
        if stub:
            del sys.modules["wandb"]
    return config, model, train, multiquery_ar, utils


def zoology_attention_epoch(path: str | None, seq_len: int = 256, kv: int = 16, d_model: int = 128,
                            batch: int = 256, num_train: int = 100_000, num_test: int = 3_000,
                            epochs: int = 2, lr: float = 2.1544e-3, device: str | None = None) -> dict:
    """Zoology's figure-2 attention run (1 head, learned positions, fp32): data seconds, epoch seconds,
    and validation accuracy after each epoch."""
    config, model_mod, train_mod, mqar, utils = _import_zoology(path)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    seg = dict(vocab_size=8192, input_seq_len=seq_len, num_kv_pairs=kv, random_non_queries=False, power_a=0.01)
    data = config.DataConfig(train_configs=[mqar.MQARConfig(num_examples=num_train, **seg)],
                             test_configs=[mqar.MQARConfig(num_examples=num_test, **seg)], batch_size=batch)
    t0 = time.perf_counter()
    train_dl, test_dl = utils.prepare_data(data)
    data_s = time.perf_counter() - t0
    mcfg = config.ModelConfig(d_model=d_model, n_layers=2, max_position_embeddings=seq_len, vocab_size=8192,
                              sequence_mixer=config.ModuleConfig(name="zoology.mixers.attention.MHA",
                                                                 kwargs={"dropout": 0.1, "num_heads": 1}),
                              state_mixer=config.ModuleConfig(name="torch.nn.Identity", kwargs={}))
    trainer = train_mod.Trainer(model=model_mod.LanguageModel(mcfg), train_dataloader=train_dl,
                                test_dataloader=test_dl, max_epochs=epochs, learning_rate=lr,
                                logger=types.SimpleNamespace(log=lambda *a, **k: None), device=device)
    # the set-up lines of Trainer.fit, so that each epoch can be timed on its own
    trainer.model.to(device)
    trainer.loss_fn = torch.nn.CrossEntropyLoss()
    trainer.optimizer = torch.optim.AdamW(trainer.model.parameters(), lr=lr, weight_decay=0.1)
    trainer.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(trainer.optimizer, T_max=epochs)
    epoch_s, accuracy = [], []
    for epoch in range(epochs):
        sync()
        t = time.perf_counter()
        trainer.train_epoch(epoch)
        sync()
        epoch_s.append(time.perf_counter() - t)
        accuracy.append(round(float(trainer.test(epoch)["valid/accuracy"]), 4))
        trainer.scheduler.step()
    return {"status": "completed", "data_s": data_s, "epoch_s": epoch_s[-1], "first_epoch_s": epoch_s[0],
            "accuracy": accuracy}
