import { SetMetadata } from '@nestjs/common';

export const IS_PUBLIC = 'igs:isPublic';

/** Routes anyone may call, without an API key: media, health and the contract. */
export const Public = () => SetMetadata(IS_PUBLIC, true);
