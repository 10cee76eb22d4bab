/**
 * What the local engine sees of a person: 17 body keypoints from MoveNet Lightning and a person mask from
 * MediaPipe Selfie Segmentation, both run on the CPU by TensorFlow.js's WebAssembly backend (one thread, SIMD).
 * The weights are files of this repository (models/, with their licences and sources in models/README.md),
 * read from disk once per thread: nothing is downloaded, at install or at run time.
 */
import { readFile } from 'node:fs/promises';
import '@tensorflow/tfjs-backend-wasm';
import { type GraphModel, loadGraphModel } from '@tensorflow/tfjs-converter';
import * as tf from '@tensorflow/tfjs-core';
import { type Plane, type RawImage, fromRaw, toPlane, toRawImage } from './raw-image.js';

// Math functions as module constants: a global lookup per call is very slow inside Jest's vm contexts.
const { max, round } = Math;

/** MoveNet's keypoints, in its output order. */
const KEYPOINT_NAMES = [
  'nose',
  'leftEye',
  'rightEye',
  'leftEar',
  'rightEar',
  'leftShoulder',
  'rightShoulder',
  'leftElbow',
  'rightElbow',
  'leftWrist',
  'rightWrist',
  'leftHip',
  'rightHip',
  'leftKnee',
  'rightKnee',
  'leftAnkle',
  'rightAnkle',
] as const;
export type KeypointName = (typeof KEYPOINT_NAMES)[number];

/** A keypoint in the input image's pixels, with the model's confidence (0..1) that it is there. */
export interface Keypoint {
  x: number;
  y: number;
  score: number;
}

export interface PersonAnalysis {
  keypoints: Record<KeypointName, Keypoint>;
  /** Person probability (0..255) per pixel of the input image. */
  mask: Plane;
}

const POSE_SIZE = 192;
const MASK_SIZE = 256;
const MODELS_DIR = new URL('../../../models/', import.meta.url);

interface PersonModels {
  pose: GraphModel;
  segmentation: GraphModel;
}

let loading: Promise<PersonModels> | undefined;

/** The models, loaded on first use and kept for the thread's life (an engine thread starts loading at once). */
export function personModels(): Promise<PersonModels> {
  loading ??= load();
  return loading;
}

async function load(): Promise<PersonModels> {
  await tf.setBackend('wasm');
  const [pose, segmentation] = await Promise.all([graphModel('movenet-lightning'), graphModel('selfie')]);
  return { pose, segmentation };
}

async function graphModel(name: string): Promise<GraphModel> {
  const [json, weights] = await Promise.all([
    readFile(new URL(`${name}.json`, MODELS_DIR), 'utf8'),
    readFile(new URL(`${name}.bin`, MODELS_DIR)),
  ]);
  const artifacts = JSON.parse(json) as {
    modelTopology: object;
    format?: string;
    weightsManifest: { weights: tf.io.WeightsManifestEntry[] }[];
  };
  return loadGraphModel({
    load: () =>
      Promise.resolve({
        modelTopology: artifacts.modelTopology,
        format: artifacts.format,
        weightSpecs: artifacts.weightsManifest.flatMap((group) => group.weights),
        weightData: weights.buffer.slice(weights.byteOffset, weights.byteOffset + weights.byteLength),
      }),
  });
}

/** Keypoints and mask of the (main) person in `image`. */
export async function analysePerson(image: RawImage): Promise<PersonAnalysis> {
  const models = await personModels();
  const [keypoints, mask] = await Promise.all([poseOf(models.pose, image), maskOf(models.segmentation, image)]);
  return { keypoints, mask };
}

async function poseOf(model: GraphModel, image: RawImage): Promise<Record<KeypointName, Keypoint>> {
  // Letterboxed into the model's square (top-left, black padding), so the body keeps its proportions.
  const input = await toRawImage(
    fromRaw(image)
      .removeAlpha()
      .resize(POSE_SIZE, POSE_SIZE, { fit: 'contain', position: 'left top', background: '#000000' }),
  );
  const output = tf.tidy(() =>
    model.execute(tf.tensor(Int32Array.from(input.data), [1, POSE_SIZE, POSE_SIZE, 3], 'int32')),
  );
  const values = await (output as tf.Tensor).data();
  tf.dispose(output);
  const side = max(image.width, image.height);
  const entries = KEYPOINT_NAMES.map((name, k) => {
    // Each keypoint is (y, x, score), coordinates as fractions of the square.
    const point = { x: values[k * 3 + 1] * side, y: values[k * 3] * side, score: values[k * 3 + 2] };
    return [name, point] as const;
  });
  return Object.fromEntries(entries) as Record<KeypointName, Keypoint>;
}

async function maskOf(model: GraphModel, image: RawImage): Promise<Plane> {
  // A tall photo is stretched to the model's square, which widens its people, and the model sees them well. A wide
  // one squeezed so would make its people (two side by side, say) too thin for the model to see anyone: it is
  // letterboxed instead (top-left, black padding), and the padding cut off again below.
  const wide = image.width > image.height;
  const input = await toRawImage(
    fromRaw(image)
      .removeAlpha()
      .resize(MASK_SIZE, MASK_SIZE, { fit: wide ? 'contain' : 'fill', position: 'left top', background: '#000000' }),
  );
  const scaled = new Float32Array(input.data.length);
  for (let i = 0; i < scaled.length; i++) scaled[i] = input.data[i] / 255;
  const output = tf.tidy(() => model.execute(tf.tensor(scaled, [1, MASK_SIZE, MASK_SIZE, 3])));
  const probabilities = await (output as tf.Tensor).data();
  tf.dispose(output);
  const small = new Uint8Array(MASK_SIZE * MASK_SIZE);
  for (let i = 0; i < small.length; i++) small[i] = round(probabilities[i] * 255);
  const photoHeight = wide ? max(1, round((MASK_SIZE * image.height) / image.width)) : MASK_SIZE;
  return toPlane(
    fromRaw({ data: small, width: MASK_SIZE, height: MASK_SIZE })
      .extract({ left: 0, top: 0, width: MASK_SIZE, height: photoHeight })
      .resize(image.width, image.height, { fit: 'fill' }),
  );
}
