type Json = Record<string, unknown>;
export function loadContract(): Json;
export function documentedResponse(doc: Json, method: string, pathTemplate: string, status: number): Json | undefined;
export function responseSchema(
  doc: Json,
  method: string,
  pathTemplate: string,
  status: number,
  contentType: string,
): Json | undefined;
export function toJsonSchema(doc: Json, node: unknown): Json;
