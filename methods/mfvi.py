"""Full mean-field variational inference (Bayes by Backprop, Blundell et al. 2015).

The PBN papers' "VI" / "Bayesian" baseline: every Linear / Conv weight and bias is a Gaussian
``N(mu, softplus(rho)^2)`` (batch norm stays deterministic), trained from a random
initialisation with the same objective, prior, sample counts and KL annealing as PBN (PBN
paper, Appendix H.6: "For all Partial Bayesian training or standard VI training -ELBO loss
is minimized"). Implemented as :class:`bench.subnet.partial_vi.PartialVI` with every
candidate parameter selected, so the two methods differ only in the subnetwork and the
initialisation.
"""
from __future__ import annotations

from bench.subnet.selection import candidate_indices
from methods.base import register_method
from methods.pbn import PBN, VIMethod


@register_method("mfvi")
class MFVI(VIMethod):
    description = "mean-field VI over all Linear/Conv weights (Bayes by Backprop), random init"
    # the PBN paper trains its VI baseline as its partially Bayesian networks (App. H.3: LeNet-300-100
    # and the small ResNet 50 epochs, ResNet-18 100 "for the Bayesian and Partial Bayesian approaches"):
    # a shorter training is unverified until a phase trial shows it suffices (bench.validity: phase_budget)
    PAPER_EPOCHS = PBN.PAPER_EPOCHS
    # and, training its own network from a random start, that training must end at rest (bench.validity)
    VALIDITY_CHECKS = VIMethod.VALIDITY_CHECKS + ("vi_converged",)
    defaults = {**VIMethod.vi_defaults}

    def build_posterior(self, train):
        net = self.fresh_network("init").to(self.ctx.device)
        indices = candidate_indices(net)
        return net, indices, {"n_candidates": int(indices.numel()), "init": "random",
                              "criterion": {"name": "all"}}

    def paper_train_flops(self, f_d, r, n_samples):
        # Appendix C, VI: 2 f_d (N + 2) per example and step (the 2x accounts for sigma)
        n = int(self.meta.get("train", {}).get("num_train", self.ctx.num_train))
        epochs = int(self.meta.get("train", {}).get("epochs", self.train_config().epochs))
        per_step = 2 * (n_samples + 2) * f_d
        return {"train_flops_per_example_step_paper": per_step, "train_flops_paper": per_step * n * epochs}
