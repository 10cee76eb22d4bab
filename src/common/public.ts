import { SetMetadata } from '@nestjs/common';

export const IS_PUBLIC = 'igs:isPublic';

/** Routes anyone may call, without an API key: health and the contract. */
export const Public = () => SetMetadata(IS_PUBLIC, true);

export const KEY_OPTIONAL = 'igs:keyOptional';

/**
 * Routes with another way in than a key (media: a signed URL): a key that is sent is checked as on every route, and
 * none lets the request through without a principal, for the route to decide.
 */
export const KeyOptional = () => SetMetadata(KEY_OPTIONAL, true);
