"""The synthetic world of `vltools synth`: scenes of coloured shapes, their drawings, captions and pairs."""
