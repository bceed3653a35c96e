# The synthetic runs' backbone, one definition for every recipe. Include it at the top of a Makefile's synthetic
# branch (it needs VLTOOLS, OUT, SEED and DEVICE, and SYNTH_WORLD when the target of the rule that makes the world
# $(OUT)/world is not $(OUT)/world/images.jsonl; it leaves the Makefile's default goal alone), then extract with
#   --backbone resnet18 --weights $(SYNTH_WEIGHTS)
# and list $(SYNTH_WEIGHTS_FILE) among that target's prerequisites.
#
#   SYNTH_BACKBONE=trained   (default) a ResNet-18 trained on the world's own labels, the shape, colour, size and
#                            position of each object (`vltools synth-backbone`, about a minute on a 2-core CPU),
#                            made once as $(OUT)/synth_resnet18.pt: toy features that carry what the captions say
#   SYNTH_BACKBONE=random    an untrained ResNet-18 (--weights none, seeded), the recipes' extractor before
#   SYNTH_BACKBONE_EPOCHS    its training epochs (empty: the command's default)

SYNTH_BACKBONE ?= trained
SYNTH_BACKBONE_EPOCHS ?=
SYNTH_WORLD ?= $(OUT)/world/images.jsonl
ifeq ($(SYNTH_BACKBONE),trained)
SYNTH_WEIGHTS := $(OUT)/synth_resnet18.pt
SYNTH_WEIGHTS_FILE := $(SYNTH_WEIGHTS)
SYNTH_GOAL := $(.DEFAULT_GOAL)
$(SYNTH_WEIGHTS): $(SYNTH_WORLD)
	$(VLTOOLS) synth-backbone $(OUT)/world --seed $(SEED) --device $(DEVICE) \
		$(if $(SYNTH_BACKBONE_EPOCHS),--epochs $(SYNTH_BACKBONE_EPOCHS)) -o $@
.DEFAULT_GOAL := $(SYNTH_GOAL)
else ifeq ($(SYNTH_BACKBONE),random)
SYNTH_WEIGHTS := none
SYNTH_WEIGHTS_FILE :=
else
$(error SYNTH_BACKBONE=$(SYNTH_BACKBONE): use trained or random)
endif
