// Presets: one idea each, in one click, with a sentence saying what to look at.
import type { Store, Traits } from "../store";

export interface Preset {
  id: string;
  label: string;
  /** needs a generated input (the distribution controls) */
  generated: boolean;
  traits: (store: Store) => Partial<Traits>;
  select?: [number, number];
  text: (store: Store) => string;
}

const plain = { offset: 0, scale: 1, channel_spread: 0, outlier_channel: -1, pattern: "blobs", eps: 1e-5, silu: false };

function patch(store: Store): DataView {
  const geo = store.geo!;
  const [rows, cols] = geo.spatial.length > 1 ? [geo.spatial.slice(0, -1).reduce((a, b) => a * b, 1), geo.spatial[geo.spatial.length - 1] ?? 1] : [1, geo.s];
  const mask = new Float32Array(geo.c * geo.s);
  for (let i = 0; i < Math.ceil(rows / 2); i++) for (let j = 0; j < Math.ceil(cols / 2); j++) mask[i * cols + j] = 1;
  return new DataView(mask.buffer);
}

export const PRESETS: Preset[] = [
  {
    id: "outlier",
    label: "An outlier channel",
    generated: true,
    traits: (s) => ({ ...plain, outlier_channel: 1, num_groups: Math.max(1, (s.geo?.c ?? 4) / 4), grad_mode: "random" }),
    select: [0, 0],
    text: () =>
      "Channel 1 sits 8 above the others with 10× their spread, and it shares group 0 with channels 0, 2 and 3. Their mean and rstd are dominated by it: in y the other channels of group 0 are squashed to nearly flat tiles, while group 1 keeps its detail.",
  },
  {
    id: "batch",
    label: "The same sample in a batch of 2, then 32",
    generated: false,
    traits: (s) => ({ batch: Number(s.get("batch")) === 32 ? 2 : 32 }),
    select: [0, 0],
    text: (s) =>
      `N is now ${Number(s.get("batch"))}. Sample 0's mean and rstd (first row of the statistics) are the same as before: GroupNorm never looks across samples. BatchNorm's channel means (open "BatchNorm against GroupNorm") moved. Press again to switch back.`,
  },
  {
    id: "eps",
    label: "eps on a nearly constant group",
    generated: true,
    traits: () => ({ ...plain, scale: 0.001, eps: 0.01 }),
    text: () =>
      "Every group's variance (about 1e-6) is far below eps = 0.01: rstd = 1/√(var + eps) is about 10 instead of 1000, so y stays near 0 instead of blowing rounding-size wiggles up to unit size. Slide eps down and watch rstd and y grow.",
  },
  {
    id: "layer",
    label: "G = 1: LayerNorm",
    generated: false,
    traits: () => ({ num_groups: 1 }),
    text: () => "One mean and rstd per sample over every channel: in y the channels keep their differences (bright tiles stay bright); only the sample as a whole is normalized.",
  },
  {
    id: "instance",
    label: "G = C: InstanceNorm",
    generated: false,
    traits: (s) => ({ num_groups: s.geo?.c ?? 1 }),
    text: () => "Every channel of every sample is normalized alone: in y all tiles have the same brightness and contrast; the per-channel offsets and scales of x are gone.",
  },
  {
    id: "paint",
    label: "A painted loss",
    generated: false,
    traits: (s) => ({ grad_mode: "painted", dy_paint: patch(s) }),
    select: [0, 0],
    text: () =>
      "dy = 1 on a patch of channel 0 and 0 elsewhere (the loss is the sum of y over the patch). dx is non-zero in every element of channel 0's group and 0 in every other group: the shared mean and rstd tie a group's elements together. Drag on dy to paint more.",
  },
];

export const DEFAULT_LESSON = {
  title: "Start here",
  text: "Every channel of x has its own offset and scale (the tiles' brightness and contrast). GroupNorm gives each group of channels in each sample mean 0 and variance 1: compare x and y, then click a group in the statistics.",
};
