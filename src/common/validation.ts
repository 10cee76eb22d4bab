import { ValidationPipe, type ValidationError } from '@nestjs/common';
import { registerDecorator, type ValidationOptions } from 'class-validator';
import { DomainError, type FieldError } from './problem.js';

/**
 * Validates query and body DTOs (class-validator) and answers what breaks them as 400 `validation_failed`, naming
 * each field. The first broken field's message makes the detail, unless its decorator gives one of its own (the
 * `detail` of its context).
 */
export function validationPipe(): ValidationPipe {
  return new ValidationPipe({
    transform: true,
    validationError: { target: false, value: false },
    exceptionFactory: (errors) => {
      const fields = errors.flatMap(fieldErrorsOf);
      const [first] = errors;
      const contexts: Record<string, { detail?: unknown }> = first?.contexts ?? {};
      const detail = Object.values(contexts)
        .map((context) => context.detail)
        .find((text): text is string => typeof text === 'string');
      return new DomainError(
        'validation_failed',
        detail ?? `Invalid ${fields[0]?.field ?? 'request'}: ${fields[0]?.message ?? 'malformed'}.`,
        { errors: fields },
      );
    },
  });
}

/** One field error per broken field: its first constraint's message (they all say what the field must be). */
function fieldErrorsOf(error: ValidationError): FieldError[] {
  const [message] = Object.values(error.constraints ?? {});
  return message ? [{ field: error.property, message }] : [];
}

/** The object holds no property but the decorated one: a body that is exactly `{"<name>": ...}`. */
export function IsTheOnlyProperty(options: ValidationOptions): PropertyDecorator {
  return (target, propertyName) =>
    registerDecorator({
      name: 'isTheOnlyProperty',
      target: target.constructor,
      propertyName: propertyName as string,
      options,
      validator: {
        validate: (_value, args) => Object.keys(args?.object ?? {}).every((key) => key === propertyName),
      },
    });
}

/**
 * A query parameter given once as a whole number, as written (`1e1`, `1.0` and ` 1` are not), turned into a number
 * before it is validated; anything else is left as it came, for the number checks to refuse.
 */
export function wholeNumberParameter({ value }: { value: unknown }): unknown {
  return typeof value === 'string' && /^\d{1,16}$/.test(value) ? Number(value) : value;
}
