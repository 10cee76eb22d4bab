import type { ErrorObject } from 'ajv';

/** The key path of the value a schema error is about. */
export function errorPath(error: ErrorObject, at: string): string {
  return [at, ...error.instancePath.split('/').slice(1).map(unescapePointer)].filter(Boolean).join('.');
}

/** A schema error in words, starting with its key path. */
export function describeError(error: ErrorObject, at: string): string {
  const path = errorPath(error, at);
  const params = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case 'additionalProperties': {
      const allowed = Object.keys((error.parentSchema as { properties?: object }).properties ?? {}).join(', ');
      return `${join(path, String(params.additionalProperty))}: unknown key${allowed ? ` (allowed: ${allowed})` : ''}`;
    }
    case 'required':
      return `${join(path, String(params.missingProperty))}: is required`;
    case 'type': {
      const description = (error.parentSchema as { description?: string } | undefined)?.description;
      return `${path}: must be ${description ?? article(String(params.type))}`;
    }
    case 'enum':
      return `${path}: must be one of ${(params.allowedValues as unknown[]).join(', ')}`;
    default: {
      const description = (error.parentSchema as { description?: string } | undefined)?.description;
      return description ? `${path}: must be ${description}` : `${path}: ${error.message}`;
    }
  }
}

function join(path: string, key: string): string {
  return path ? `${path}.${key}` : key;
}

function article(type: string): string {
  const names: Record<string, string> = {
    object: 'a mapping',
    string: 'a string',
    integer: 'a whole number',
    'string,integer': 'a string',
    array: 'a list',
  };
  return names[type] ?? type;
}

function unescapePointer(segment: string): string {
  return segment.replace(/~1/g, '/').replace(/~0/g, '~');
}
